"""Self-training methods over BatchNorm affine parameters: RPL, conjugate pseudo-labels (CPL) and SLR."""

from __future__ import annotations

import torch
from torch import nn

from tta_eval.methods.configs import CPLConfig, RPLConfig, SLRConfig
from tta_eval.methods.entropy import BatchNormGradientMethod
from tta_eval.methods.losses import conjugate_polyloss, generalized_cross_entropy, kl_to_uniform, soft_likelihood_ratio


class RPL(BatchNormGradientMethod):
    """RPL (Rusak et al. 2022): generalised cross-entropy to the model's own hard pseudo-labels."""

    method_name = "rpl"

    def __init__(self, model: nn.Module, config: RPLConfig) -> None:
        super().__init__(model, config)
        self._remember_initial_state()

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on mean GCE(q) to arg-max labels."""
        logits = self.model(images)
        loss = generalized_cross_entropy(logits, logits.argmax(1), self.config.q).mean()
        self.last_step = self._take_step(loss, images.shape[0])
        return logits.detach()


class CPL(BatchNormGradientMethod):
    """Conjugate pseudo-labels (Goyal et al. 2022) for a model trained with the PolyLoss(ε)."""

    method_name = "cpl"

    def __init__(self, model: nn.Module, config: CPLConfig) -> None:
        super().__init__(model, config)
        self._remember_initial_state()

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one SGD step on the mean conjugate loss."""
        logits = self.model(images)
        loss = conjugate_polyloss(logits, self.config.poly_epsilon, self.config.temperature).mean()
        self.last_step = self._take_step(loss, images.shape[0])
        return logits.detach()


class SLR(BatchNormGradientMethod):
    """SLR (Mummadi et al. 2021): soft likelihood ratio loss plus a class-diversity term, Adam.

    loss = mean_n SLR(z_n; y_n) + w · KL(p̄ ‖ uniform), with y the stop-gradient prediction (or its
    one-hot arg-max) and p̄ = m · p̄_prev + (1 - m) · mean_n softmax(z_n) (p̄_prev constant; the
    first batch uses its own mean). Only BN affine parameters change, so the last layer stays frozen.
    """

    method_name = "slr"

    def __init__(self, model: nn.Module, config: SLRConfig) -> None:
        super().__init__(model, config)
        self.mean_prediction: torch.Tensor | None = None
        self._remember_initial_state()

    def _make_optimizer(self, parameters: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            parameters, lr=self.config.learning_rate, betas=(self.config.adam_beta1, self.config.adam_beta2), foreach=True
        )

    def _reset_method_buffers(self) -> None:
        self.mean_prediction = None

    @torch.enable_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits (N×C) for images (N×C×H×W), then one Adam step on the SLR + diversity loss."""
        config: SLRConfig = self.config
        logits = self.model(images)
        probabilities = logits.softmax(1)
        if config.soft_labels == "soft":
            labels = probabilities.detach()
        else:
            labels = torch.nn.functional.one_hot(logits.argmax(1), logits.shape[1]).to(logits.dtype)
        batch_mean = probabilities.mean(0)
        if self.mean_prediction is None:
            mean_prediction = batch_mean
        else:
            mean_prediction = config.diversity_momentum * self.mean_prediction + (1 - config.diversity_momentum) * batch_mean
        loss = soft_likelihood_ratio(logits, labels).mean() + config.diversity_weight * kl_to_uniform(mean_prediction)
        self.last_step = self._take_step(loss, images.shape[0])
        self.mean_prediction = mean_prediction.detach()
        return logits.detach()
